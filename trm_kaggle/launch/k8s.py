"""Kubernetes manifests for a training on N nodes: one file per training, applied with `kubectl apply -f`.

`flavor=job` (plain Kubernetes, batch/v1):

    ConfigMap <name>-settings   the resolved settings (run_config.yaml), mounted read-only in every pod
    Service   <name>            headless (clusterIP None): gives pod i the DNS name <name>-i.<name>
    Job       <name>            Indexed, completions = parallelism = N: one pod per node, each running
                                `trm-kaggle torchrun --node-rank $(JOB_COMPLETION_INDEX) ...` with the
                                rendezvous at pod 0 (<name>-0.<name>:PORT)

`flavor=pytorchjob` (Kubeflow's training operator, kubeflow.org/v1): the ConfigMap and a PyTorchJob with
one Master and N-1 Workers; the operator makes the services and sets MASTER_ADDR, MASTER_PORT and RANK,
which the torchrun line takes as its endpoint and node rank.

Every pod mounts the claim (`pvc`) at `mount`, its working directory, where the data and the runs lie,
and a memory-backed /dev/shm (`shm_size`: DataLoader workers and NCCL outgrow the default 64 MB). GPU
pods ask for `nvidia.com/gpu: G` (requests equal limits for extended resources).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trm_kaggle.config import ClusterConfig
from trm_kaggle.launch.jobs import SETTINGS_FILE, ClusterJob, torchrun_line
from trm_kaggle.wording import command_line, count, one_line

SETTINGS_DIR = "/etc/trm-kaggle"  # where the settings ConfigMap is mounted
UID = 1000  # the Dockerfile's non-root user (and group): the claim is made writable for that group
GPU_RESOURCE = "nvidia.com/gpu"


def render(cluster: ClusterConfig, jobs: list[ClusterJob], export: str | None = None) -> dict[str, str]:
    """{file name: multi-document YAML} with one file per training."""
    out = {}
    for job in jobs:
        docs = [settings_map(cluster, job)]
        if cluster.k8s.flavor == "pytorchjob":
            docs.append(pytorch_job(cluster, job, export))
        else:
            docs += [rendezvous_service(cluster, job), indexed_job(cluster, job, export)]
        # one line: a newline in the run's folder name ended the comment and began YAML of its own (an object)
        header = (f"# trm-kaggle: run {one_line(job.run)} on {count(cluster.nodes, 'node')} x {count(cluster.procs_per_node, 'worker')}; "
                  f"written, not submitted.\n"
                  f"# Submit: {command_line('kubectl', 'apply', '-f', Path(job.name + '.yaml'))}\n")
        out[f"{job.name}.yaml"] = header + yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False,
                                                         default_flow_style=False, width=120)
    return out


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the settings) as literal blocks, readable in the manifest."""


_Dumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s,
                                                              style="|" if "\n" in s else None))


def labels(job: ClusterJob) -> dict[str, str]:
    return {"app.kubernetes.io/name": "trm-kaggle", "app.kubernetes.io/instance": job.name,
            "app.kubernetes.io/component": "train"}


def _metadata(cluster: ClusterConfig, name: str, job: ClusterJob) -> dict[str, Any]:
    return {"name": name, "namespace": cluster.k8s.namespace, "labels": labels(job)}


def settings_map(cluster: ClusterConfig, job: ClusterJob) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _metadata(cluster, f"{job.name}-settings", job),
            "data": {SETTINGS_FILE: job.settings_text()}}


def rendezvous_service(cluster: ClusterConfig, job: ClusterJob) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _metadata(cluster, job.name, job),
            "spec": {"clusterIP": "None",
                     # the nodes look each other up before any is "ready": a training pod has no readiness probe
                     "publishNotReadyAddresses": True,
                     "selector": {"app.kubernetes.io/instance": job.name},
                     "ports": [{"name": "rendezvous", "port": cluster.rdzv_port, "targetPort": cluster.rdzv_port,
                                "protocol": "TCP"}]}}


def indexed_job(cluster: ClusterConfig, job: ClusterJob, export: str | None) -> dict[str, Any]:
    command = torchrun_line(cluster, endpoint=f"{job.name}-0.{job.name}:{cluster.rdzv_port}",
                            node_rank="$(JOB_COMPLETION_INDEX)", rdzv_id=job.name,
                            settings=f"{SETTINGS_DIR}/{SETTINGS_FILE}", export=_as_given(export))
    index = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}
    template = pod_template(cluster, job, container="trainer", command=command, env=[index],
                            port_name="rendezvous", restart="Never")
    template["spec"]["subdomain"] = job.name  # with the headless Service: pod i is <name>-i.<name>
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _metadata(cluster, job.name, job),
            "spec": {"completionMode": "Indexed", "completions": cluster.nodes, "parallelism": cluster.nodes,
                     # torchrun restarts failed worker groups inside the pods; a pod that fails as a whole
                     # (a node lost, torchrun out of restarts) is replaced up to as many times
                     "backoffLimit": cluster.max_restarts,
                     "template": template}}


def pytorch_job(cluster: ClusterConfig, job: ClusterJob, export: str | None) -> dict[str, Any]:
    command = torchrun_line(cluster, endpoint="$(MASTER_ADDR):$(MASTER_PORT)", node_rank="$(RANK)",
                            rdzv_id=job.name, settings=f"{SETTINGS_DIR}/{SETTINGS_FILE}", export=_as_given(export))
    template = pod_template(cluster, job, container="pytorch", command=command, env=[],
                            port_name="pytorchjob-port", restart=None)
    replicas = {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template}}
    if cluster.nodes > 1:
        replicas["Worker"] = {"replicas": cluster.nodes - 1, "restartPolicy": "OnFailure", "template": template}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": _metadata(cluster, job.name, job),
            "spec": {"runPolicy": {"backoffLimit": cluster.max_restarts, "cleanPodPolicy": "None"},
                     "pytorchReplicaSpecs": replicas}}


def _as_given(text: str | None) -> str | None:
    """`text` (the user's, in a container's command or env) with each `$` doubled: Kubernetes expands `$(NAME)`
    there and reads `$$` as `$`, so the worker gets the text as given (an --export path, or a --mount it lies in,
    holding `$(JOB_COMPLETION_INDEX)` would otherwise be another folder on every pod)."""
    return None if text is None else text.replace("$", "$$")


def pod_template(cluster: ClusterConfig, job: ClusterJob, *, container: str, command: list[str],
                 env: list[dict], port_name: str, restart: str | None) -> dict[str, Any]:
    k8s = cluster.k8s
    # Kubernetes expands `$(NAME)` in an env value and reads `$$` as `$`: each `$` doubled, the worker gets the
    # value as given (as the SLURM script's quoted export gives it)
    env = env + [{"name": k, "value": _as_given(v)} for k, _, v in (e.partition("=") for e in cluster.env)]
    main: dict[str, Any] = {
        "name": container, "image": k8s.image, "imagePullPolicy": "IfNotPresent", "command": command,
        "workingDir": k8s.mount, "env": env,
        "ports": [{"name": port_name, "containerPort": cluster.rdzv_port, "protocol": "TCP"}],
        "volumeMounts": [{"name": "shared", "mountPath": k8s.mount},
                         {"name": "settings", "mountPath": SETTINGS_DIR, "readOnly": True},
                         {"name": "shm", "mountPath": "/dev/shm"}]}
    if cluster.gpus_per_node:
        main["resources"] = {"requests": {GPU_RESOURCE: cluster.gpus_per_node},
                              "limits": {GPU_RESOURCE: cluster.gpus_per_node}}
    spec: dict[str, Any] = {
        "containers": [main],
        "securityContext": {"fsGroup": UID},  # the image's non-root user may write to the claim
        "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": k8s.pvc}},
                    {"name": "settings", "configMap": {"name": f"{job.name}-settings"}},
                    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": k8s.shm_size}}]}
    if restart:
        spec["restartPolicy"] = restart
    if k8s.node_selector:
        spec["nodeSelector"] = dict(item.split("=", 1) for item in k8s.node_selector)
    if k8s.tolerations:
        spec["tolerations"] = [_toleration(t) for t in k8s.tolerations]
    return {"metadata": {"labels": labels(job)}, "spec": spec}


def _toleration(text: str) -> dict[str, str]:
    """KEY[=VALUE][:EFFECT] -> a toleration (Equal with a value, else Exists; every effect without one)."""
    head, _, effect = text.rpartition(":") if ":" in text else (text, "", "")
    key, sep, value = head.partition("=")
    out = {"key": key, "operator": "Equal" if sep else "Exists"}
    if sep:
        out["value"] = value
    if effect:
        out["effect"] = effect
    return out
