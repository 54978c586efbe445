"""A small stand-in for Kaggle's API server, for tests of the real `kaggle` package: run as

    unshare -rn python kaggle_stub.py RECORD.json SCENARIO -- COMMAND ...

Inside the new (private) network namespace it brings up loopback, serves http://localhost:80 (where
KAGGLE_API_ENVIRONMENT=LOCALHOST sends the kaggle client: POST /api/v1/<Service>/<Method> with JSON bodies, and
PUT of uploaded files to the URL StartBlobUpload hands out), runs COMMAND, writes every request it received to
RECORD.json, the bytes of every uploaded file to RECORD.blobs/<n> (the n-th StartBlobUpload, whose answer's token
is `blob-<n>`), and exits with COMMAND's status. An access token is introspected as the user `tokenowner`.
SCENARIO picks what the server answers:

    ok                     datasets unknown at first, created, still processing once then ready; the kernel
                           push accepted
    existing               both datasets exist already (so they are versioned)
    kernel-slug-taken      SaveKernel answers with an error
    invalid-source         SaveKernel accepts, but lists a dataset source as invalid
    dataset-slug-taken     CreateDataset answers with an error
"""

from __future__ import annotations

import fcntl
import json
import socket
import struct
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def bring_up_loopback() -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, struct.pack("16sH22x", b"lo", 0)))[1]
    fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))


class Kaggle:
    def __init__(self, scenario: str, blobs: Path):
        self.scenario, self.blobs_dir = scenario, blobs
        self.requests: list[dict] = []
        self.datasets: dict[str, int] = {}  # "owner/slug" -> times its status was asked since it was made
        self.blobs = 0
        self.lock = threading.Lock()
        if scenario == "existing":
            self.datasets = {"tester/trm-kaggle-wheels": 5, "tester/trm-kaggle-weights": 5}

    def answer(self, method: str, path: str, body, auth: str = "") -> tuple[int, dict]:
        with self.lock:
            self.requests.append({"method": method, "path": path, "auth": auth, "body": body})
            name = path.rsplit("/", 1)[-1]
            if method == "PUT":  # /upload/<n>: the file's bytes, kept (appended: an upload may come in parts)
                with open(self.blobs_dir / path.rsplit("/", 1)[-1], "ab") as f:
                    f.write(body.pop("data"))
                return 200, {}
            if name == "IntrospectToken":
                return 200, {"active": True, "username": "tokenowner"}
            if name == "StartBlobUpload":
                self.blobs += 1
                return 200, {"token": f"blob-{self.blobs}", "createUrl": f"http://localhost/upload/{self.blobs}"}
            if name == "GetDatasetStatus":
                ident = f"{body.get('ownerSlug')}/{body.get('datasetSlug')}"
                if ident not in self.datasets:
                    return 404, {"code": 404, "message": f"Dataset {ident} not found"}
                self.datasets[ident] += 1
                return 200, {"status": "BLOBS_RECEIVED" if self.datasets[ident] == 1 else "READY"}
            if name == "CreateDataset":
                if self.scenario == "dataset-slug-taken":
                    return 200, {"error": "The requested slug is reserved"}
                ident = f"{body.get('ownerSlug')}/{body.get('slug')}"
                self.datasets[ident] = 0
                return 200, {"ref": ident, "url": f"http://localhost/datasets/{ident}", "status": "ok"}
            if name == "CreateDatasetVersion":
                ident = f"{body.get('ownerSlug')}/{body.get('datasetSlug')}"
                self.datasets[ident] = 0
                return 200, {"ref": ident, "url": f"http://localhost/datasets/{ident}", "status": "ok"}
            if name == "SaveKernel":
                if self.scenario == "kernel-slug-taken":
                    return 200, {"error": "Notebook slug tester/trm-kaggle-submission is already in use"}
                answer = {"ref": body.get("slug"), "url": f"http://localhost/code/{body.get('slug')}",
                          "versionNumber": 1}
                if self.scenario == "invalid-source":
                    answer["invalidDatasetSources"] = [body["datasetDataSources"][-1]]
                return 200, answer
            return 200, {}


def serve(kaggle: Kaggle) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _handle(self):
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length) if length else b""
            if self.command == "PUT":
                body = {"bytes": len(data), "data": data}
            else:
                try:
                    body = json.loads(data or b"{}")
                except ValueError:
                    body = {"raw": data[:200].decode(errors="replace")}
            auth = (self.headers.get("Authorization") or "").split(" ")[0]  # the scheme only, never the secret
            status, answer = kaggle.answer(self.command, self.path, body, auth)
            out = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_POST = do_PUT = do_GET = _handle

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 80), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> int:
    record, scenario, sep, *command = sys.argv[1:]
    assert sep == "--" and command, __doc__
    bring_up_loopback()
    blobs = Path(record + ".blobs")
    blobs.mkdir()
    kaggle = Kaggle(scenario, blobs)
    server = serve(kaggle)
    try:
        rc = subprocess.run(command).returncode
    finally:
        server.shutdown()
        with open(record, "w") as f:
            json.dump(kaggle.requests, f, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
