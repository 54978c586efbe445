"""`trm-kaggle launch k8s|slurm` and `trm-kaggle sweep --launcher k8s|slurm`: job files, not jobs.

    launch_training(cluster, ...)     one training with a local run's settings (--preset, --config, key=value)
    launch_sweep(cluster, grid, ...)  every run of a grid: one Kubernetes job per run, or one SLURM job array

Both resolve and check everything before a file is written (settings that do not resolve, a data path
outside the shared volume, a batch that does not split over the workers, a device the nodes do not
have, a run folder, export or job file inside a dataset: `check_outputs`; on SLURM's shared directory, a run
folder through a link to elsewhere or trained with other settings: `check_shared_folders`), render the files (`k8s`,
`slurm`) and write them (`files`: atomically, never over an edited file without --force). Nothing is
submitted: the result says the command that submits them.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pydantic

from trm_kaggle.atomic import not_ours_problem
from trm_kaggle.config import ClusterConfig, K8sOptions, SlurmOptions, SweepGrid, TrainConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.experiments import plan_sweep, repeated_variants
from trm_kaggle.jsonio import read_json
from trm_kaggle.launch import files, k8s, slurm
from trm_kaggle.launch.jobs import ClusterJob, cluster_settings, job_name, on_volume
from trm_kaggle.locks import LOCK_FILE
from trm_kaggle.outputs import Output, is_run_folder, kept_by_problem, overlap_problem, place_problem, writable_problem
from trm_kaggle.train import config_differences, default_run_dir, load_train_config, training_io
from trm_kaggle.wording import command_line, count, one_line


#: The options of each launcher (ClusterConfig's nested fields), by the name their flag carries.
K8S_OPTIONS = tuple(K8sOptions.model_fields)
SLURM_OPTIONS = tuple(SlurmOptions.model_fields)
_FLAGS = {"tolerations": "--toleration"}


def flag_of(field_name: str) -> str:
    return _FLAGS.get(field_name, "--" + field_name.replace("_", "-"))


def _not_given(value) -> bool:
    """None or an empty list: an option left off the command line. Tested by type, not `==`: a numpy number
    compared with [] answers with an array, whose truth is an error."""
    return value is None or (isinstance(value, (list, tuple)) and not value)


def cluster_config(launcher: str, options: dict) -> ClusterConfig:
    """ClusterConfig from the options given on a command line ({field: value}, None or [] when not given):
    the other launcher's options are refused, the SLURM shared directory defaults to the current one."""
    given = {k: v for k, v in options.items() if not _not_given(v)}
    other = SLURM_OPTIONS if launcher == "k8s" else K8S_OPTIONS
    wrong = [flag_of(k) for k in given if k in other]
    if wrong:
        raise TRMError(f"{', '.join(wrong)}: not an option of the {launcher} launcher")
    mine = {k: given.pop(k) for k in list(given) if k in K8S_OPTIONS + SLURM_OPTIONS}
    if launcher == "slurm":  # a relative directory is taken from here, where the script is written
        mine["shared_dir"] = os.path.abspath(mine.get("shared_dir") or os.getcwd())
    try:
        return ClusterConfig.model_validate({**given, "launcher": launcher, launcher: mine})
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        names = [str(x) for x in first["loc"] if not str(x).isdigit() and x not in ("k8s", "slurm")]
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "missing":
            message = "required"
        raise TRMError(f"{flag_of(names[-1]) if names else launcher}: {message}") from None


@dataclass
class LaunchResult:
    cluster: ClusterConfig
    jobs: list[ClusterJob]
    written: list[Path]
    unchanged: list[Path]
    submit: str  # the command that submits them
    compare_dir: str | None = None  # a sweep: where compare reads its runs on the cluster
    notes: list[str] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)  # a sweep's files written before, of runs it no longer has

    def describe(self) -> str:
        c = self.cluster
        what = (count(len(self.jobs), "run") if self.compare_dir else f"run {self.jobs[0].run}")
        lines = [f"wrote {count(len(self.written), 'file')} to {c.out} ({len(self.unchanged)} unchanged): {what} "
                 f"on {count(c.nodes, 'node')} x {count(c.procs_per_node, 'worker')}, nothing submitted"]
        lines += [f"  {p}" for p in self.written]
        if self.removed:
            lines.append(f"removed {count(len(self.removed), 'file')} an earlier launch of this sweep wrote there, of "
                         f"runs it no longer has: {', '.join(p.name for p in self.removed)}")
        lines.append(f"submit: {self.submit}")
        where = (f"claim {c.k8s.pvc} at {c.volume}" if c.launcher == "k8s" else c.volume)
        runs = self.compare_dir or self.jobs[0].run_dir
        lines.append(f"runs on the shared volume ({where}): {runs}")
        if self.compare_dir:
            compare = command_line("trm-kaggle", "compare", Path(self.compare_dir))
            lines.append(f"compare them there: {compare}; submitting again skips done runs and resumes the others")
        lines += [f"note: {n}" for n in self.notes]
        # typed paths (--out, --shared-dir, a run folder): a newline in one split a line, an escape sequence
        # reached the terminal
        return "\n".join(one_line(line) for line in lines)


def launch_training(cluster: ClusterConfig, *, config_file: str | None = None, presets: Sequence[str] = (),
                    overrides: Sequence[str] = ()) -> LaunchResult:
    """Job files for one training with a local run's settings (`--preset`, `--config`, `key=value`)."""
    cfg = load_train_config(config_file, presets, overrides)
    settings = cluster_settings(cfg, cluster)
    run = posixpath.basename(settings.checkpoint_path)
    name = cluster.name or job_name(cfg.run_name or run)
    export = on_volume(cluster.export, cluster.volume, "--export", "--mount" if cluster.launcher == "k8s"
                       else "--shared-dir") if cluster.export else None
    jobs = [ClusterJob(name, run, settings)]
    notes = check_shared_folders(cluster, jobs, export=export, remedy="choose another checkpoint_path")
    result = _write(cluster, jobs, export=export, inputs=[config_file] if config_file else [], given=[cfg])
    result.notes = [*notes, *result.notes]
    return result


def launch_sweep(cluster: ClusterConfig, grid: SweepGrid, *, sweep_dir: str | None = None,
                 config_file: str | None = None, presets: Sequence[str] = (),
                 overrides: Sequence[str] = ()) -> LaunchResult:
    """Job files for every run of a grid: one job per run (Kubernetes) or one job array (SLURM), each run in
    its own directory under the sweep directory on the shared volume."""
    if cluster.export:
        raise TRMError("--export applies to one training (trm-kaggle launch), not to a sweep's runs "
                       "(export a run afterwards: trm-kaggle export RUN_DIR OUT)")
    flag = "--mount" if cluster.launcher == "k8s" else "--shared-dir"
    where = on_volume(sweep_dir or f"runs/sweeps/{grid.name}", cluster.volume, "--sweep-dir", flag)
    plan = plan_sweep(grid, where, presets=presets, config_file=config_file, overrides=overrides)
    notes = [f"variants {' and '.join(names)} give the same settings on this base: their runs repeat each other"
             for names in repeated_variants(plan)]
    base = cluster.name or job_name(grid.name, limit=24)
    jobs, taken = [], set()
    for run in plan:
        name = job_name(f"{base}-{run.name}")
        if name in taken:
            name = job_name(f"{base}-{run.name}-{hashlib.sha256(run.name.encode()).hexdigest()[:6]}")
        taken.add(name)
        jobs.append(ClusterJob(name, run.name, cluster_settings(run.config, cluster, f"run {run.name}")))
    notes += check_shared_folders(cluster, jobs, sweep_dir=where, remedy="run the sweep with its settings or choose "
                                  "another --sweep-dir")
    result = _write(cluster, jobs, inputs=[config_file] if config_file else [], array_name=base,
                    given=[run.config for run in plan])
    result.compare_dir, result.notes = where, [*notes, *result.notes]
    return result


def check_shared_folders(cluster: ClusterConfig, jobs: list[ClusterJob], *, remedy: str, sweep_dir: str | None = None,
                         export: str | None = None) -> list[str]:
    """SLURM: the shared directory is this machine's too (the script's --chdir), and what lies there is checked as
    the nodes will find it, before a file is written: every folder they write, links followed, inside it (a
    --sweep-dir or run folder through a symbolic link to elsewhere had the nodes train there, off the shared
    volume), a sweep's run folder no link at all (as a local sweep refuses it), and a run that trained there already
    with settings its train states do not allow (`train` refuses it, after the script had replaced its
    run_config.yaml). A Kubernetes claim is mounted in the pods only: nothing of it is here to look at. Returns the
    notes to print: the datasets not built there yet."""
    if cluster.launcher != "slurm":
        return []
    flag, shared = "--shared-dir", cluster.volume
    # the script's --chdir and the nodes' data: a directory missing here is missing there (it was written into the
    # script, and the nodes failed on it once the job had waited in the queue)
    if not os.path.isdir(shared):
        raise TRMError(f"{flag} {one_line(shared)}: no such directory here; the SLURM shared directory is this "
                       "machine's too (the job's working directory): create it, or name the one every node sees")
    for path, what in ((sweep_dir, "--sweep-dir"), (export, "--export")):
        if path and (problem := _off_the_volume(path, shared, what, flag)):
            raise TRMError(problem)
    for job in jobs:
        where = f"run {job.run}: " if sweep_dir else ""
        if sweep_dir and os.path.islink(job.run_dir):
            raise TRMError(f"{where}run folder {job.run_dir} is a symbolic link to {os.path.realpath(job.run_dir)}; a "
                           "sweep's run is never trained through a link: remove the link")
        if problem := _off_the_volume(job.run_dir, shared, "checkpoint_path:", flag):
            raise TRMError(where + problem)
        if said := _trained_otherwise(job):
            raise TRMError(f"{where}{job.run_dir} was trained with other settings ({said}); {remedy}")
    # a dataset not there yet is said, not refused: the job may be written before the data is built (the docs' own
    # order), but one missing when the job starts fails the nodes after its wait in the queue
    missing = dict.fromkeys(path for job in jobs for path in (*job.settings.data_paths, *job.settings.data_paths_test)
                            if not os.path.isdir(path))
    return [f"data_paths: {one_line(path)}: no dataset there yet in the shared directory {one_line(shared)} ({flag}); "
            "build it there before the job starts, or name the one the nodes read" for path in missing]


def _off_the_volume(path: str, volume: str, what: str, flag: str) -> str | None:
    """Why `path` (inside `volume` as written) is not inside it once its links are followed, or None."""
    real, inside = Path(os.path.realpath(path)), Path(os.path.realpath(volume))
    if real == inside or inside in real.parents:
        return None
    return (f"{what} {path}: leads through a symbolic link to {real}, outside {volume}, the directory every node sees "
            f"({flag}); remove the link or choose a folder inside it")


def _trained_otherwise(job: ClusterJob) -> str | None:
    """What the run already in `job`'s folder (a train state, and the settings its last training wrote to
    config.json) differs in from `job`'s settings beyond what a resumed run may change (`config_differences`), or
    None. A record that cannot be read is left to `train`, which says what is wrong with it."""
    run_dir = Path(job.run_dir)
    if not any(run_dir.glob("state_step*.pt")):  # (not train.list_states: that module brings torch)
        return None
    try:
        saved = TrainConfig.model_validate(read_json(run_dir / "config.json", "config.json"))
    except (TRMError, pydantic.ValidationError):
        return None
    return config_differences(saved, job.settings)


def check_outputs(cluster: ClusterConfig, jobs: list[ClusterJob], texts: dict[str, str], export: str | None,
                  given: Sequence[TrainConfig] = ()) -> None:
    """Refuse, before a file is written, what `train` would refuse on the nodes (`training_io`, on the paths
    they use: a run folder or --export inside a dataset or an export, or where a file is, a run folder holding
    the checkpoint it loads or that is another command's folder), and job files (--out, written here) inside a
    dataset, over a file a run reads or where a run writes, as the nodes name them and as the settings `given`
    name them here (with --export as typed)."""
    job_files = Output(cluster.out, "--out", "folder", (*texts, files.RECORD, LOCK_FILE))
    runs = [(f"run {job.run}: " if len(jobs) > 1 else "", job.settings, job.run_dir, export) for job in jobs]
    runs += [("", cfg, default_run_dir(cfg), cluster.export) for cfg in given]
    # job files among a run's states: `train` (here, on the nodes, in a sweep) then refuses that run folder as a
    # launch's folder, and the run could no longer be continued
    if problem := kept_by_problem(cluster.out, "--out", is_run_folder, "a training run folder",
                                  "run.json or a train state", "run's"):
        raise TRMError(problem)
    read = []
    for where, cfg, run_dir, exported in runs:
        inputs, outputs = training_io(cfg, run_dir, export=exported)
        # the place of each output as `train` finds it there (whether the nodes may write it is theirs to say)
        problem = overlap_problem(inputs, [*outputs, job_files])
        if problem := problem or next(filter(None, map(place_problem, outputs)), None):
            raise TRMError(where + problem)
        if exported and (problem := not_ours_problem(exported, "export")):  # train refuses it before training
            raise TRMError(f"{where}--export: {problem}")
        read += inputs
    if problem := overlap_problem(read, [job_files]):
        raise TRMError(problem)


def _write(cluster: ClusterConfig, jobs: list[ClusterJob], *, inputs: Sequence[str], export: str | None = None,
           array_name: str | None = None, given: Sequence[TrainConfig] = ()) -> LaunchResult:
    if cluster.launcher == "k8s":
        texts = k8s.render(cluster, jobs, export=export)
        submit = command_line("kubectl", "apply", "-f",  # paths as Paths: `command_line` keeps `./-out` an operand
                              Path(cluster.out) / next(iter(texts)) if len(texts) == 1 else Path(cluster.out))
    else:
        texts = slurm.render(cluster, jobs, export=export, array_name=array_name)
        submit = command_line("sbatch", Path(cluster.out) / next(iter(texts)))
    check_outputs(cluster, jobs, texts, export, given)
    # the job files' folder, as the command checks it, whoever calls: /dev was written into, a file on the path
    if problem := writable_problem(Output(cluster.out, "--out", "folder")):  # was mkdir's NotADirectoryError
        raise TRMError(problem)
    # a sweep's files are its own group: written again with fewer runs, the others' files go (`files`)
    group = f"sweep {array_name} ({cluster.launcher})" if array_name else None
    broken = files.record_broken(Path(cluster.out))
    written, unchanged, removed = files.write_job_files(Path(cluster.out), texts, force=cluster.force, inputs=inputs,
                                                        group=group)
    notes = [f"{one_line(str(Path(cluster.out) / files.RECORD))} held no record of job files trm-kaggle can read: "
             "written again, listing the files here that hold what this launch writes (any other file here counts "
             "as not written by trm-kaggle)"] if broken else []
    return LaunchResult(cluster, jobs, written, unchanged, submit, notes=notes, removed=removed)
