"""An sbatch script for a training on N nodes (a job array for a sweep: one array task per run).

The batch step, on the first node of the allocation:

1. runs the setup lines (`module load ...`, `source .../bin/activate`) and exports the environment;
2. writes the run's resolved settings into `<run>/run_config.yaml` on the shared directory (atomically:
   a temporary file renamed into place), from a here-document in the script itself, so the script is
   all a submission needs;
3. takes the first host of the allocation as the rendezvous host, on port `rdzv_port` + (job id mod
   1000) so that jobs sharing a node (an array's, other users') do not meet, and starts one torchrun launcher per
   node with `srun` (`--kill-on-bad-exit`: a launcher that gives up stops the others); each launcher's
   node rank is its `SLURM_NODEID`, read by the shell srun starts on that node.

The job's working directory (`--chdir`) is the shared directory; its log is `slurm-<name>-<job id>.out`
there. Submitting the script again after a failure or a time limit resumes the run from its newest
train state, and a run already done ends at once.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from trm_kaggle.config import ClusterConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.launch.jobs import SETTINGS_FILE, ClusterJob, torchrun_line
from trm_kaggle.wording import command_line, count, one_line

HEREDOC = "TRM_KAGGLE_SETTINGS"
PORT_SPREAD = 1000  # the rendezvous port is --rdzv-port + (job id mod this)


def render(cluster: ClusterConfig, jobs: list[ClusterJob], export: str | None = None,
           array_name: str | None = None) -> dict[str, str]:
    """{file name: script}: one script, a job array when there are several jobs (a sweep)."""
    if cluster.rdzv_port + PORT_SPREAD - 1 > 65535:
        raise TRMError(f"--rdzv-port {cluster.rdzv_port}: SLURM jobs add their job id mod {PORT_SPREAD} to it (jobs "
                       f"may share a node), so it must be at most {65536 - PORT_SPREAD}")
    name = array_name or jobs[0].name
    return {f"{name}.sbatch": script(cluster, jobs, name, export)}


class _Expanded(str):
    """A token of the per-node command that the script itself writes with `$NAME` expansions (`$SLURM_NODEID`)."""


def _shell_word(token: str) -> str:
    """A token of the per-node command: the script's own `$NAME` tokens inside double quotes (each node's shell
    expands them), anything else, the user's text included (an --export path holding `$`, a backquote or a
    quote), single-quoted: it reaches the worker as given and never runs."""
    return f'"{token}"' if isinstance(token, _Expanded) else shlex.quote(token)


def script(cluster: ClusterConfig, jobs: list[ClusterJob], name: str, export: str | None) -> str:
    s = cluster.slurm
    array = len(jobs) > 1
    # the run's folder name as one line: a newline in checkpoint_path ended this comment, and the text after it ran
    # as a command on every node (and ended sbatch's reading of the #SBATCH lines below)
    what = f"{len(jobs)} runs, one per array task" if array else f"run {one_line(jobs[0].run)}"
    lines = ["#!/bin/bash",
             f"# trm-kaggle: {what}, on {count(cluster.nodes, 'node')} x {count(cluster.procs_per_node, 'worker')}; "
             "written, not "
             "submitted.",
             f"# Submit: {command_line('sbatch', Path(name + '.sbatch'))}  (again after a failure or a time limit: a "
             "run resumes from its newest train state; a done run ends at once)",
             f"#SBATCH --job-name={name}",
             f"#SBATCH --nodes={cluster.nodes}",
             "#SBATCH --ntasks-per-node=1"]
    if cluster.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={cluster.gpus_per_node}")
    if s.cpus_per_task:
        lines.append(f"#SBATCH --cpus-per-task={s.cpus_per_task}")
    lines.append(f"#SBATCH --time={s.time}")
    if s.partition:
        lines.append(f"#SBATCH --partition={s.partition}")
    if s.account:
        lines.append(f"#SBATCH --account={s.account}")
    lines += [f"#SBATCH --chdir={s.shared_dir}",
              f"#SBATCH --output=slurm-%x-{'%A_%a' if array else '%j'}.out"]
    if array:
        lines.append(f"#SBATCH --array=0-{len(jobs) - 1}")
    lines += ["", "set -eo pipefail"]
    if s.setup:  # before `set -u`: activation scripts read variables that may be unset
        lines += ["# setup (every node inherits this environment through srun)", *s.setup]
    lines += ["set -u", ""]
    for item in cluster.env:
        key, _, value = item.partition("=")
        lines.append(f"export {key}={shlex.quote(value)}")
    lines += ["task=${SLURM_ARRAY_TASK_ID:-0}",
              "run_names=(" + " ".join(shlex.quote(j.run) for j in jobs) + ")",
              "run_dirs=(" + " ".join(shlex.quote(j.run_dir) for j in jobs) + ")",
              'export TRM_RUN_DIR="${run_dirs[$task]}"', "",
              "settings() {  # the resolved settings of each run (trm-kaggle train --config reads them)",
              '    case "$1" in']
    for i, job in enumerate(jobs):
        text = job.settings_text()
        marker = HEREDOC
        while marker in text:
            marker += "_"
        lines += [f"    {i}) cat <<'{marker}'", text.rstrip("\n"), marker, "        ;;"]
    lines += ["    esac", "}",
              'mkdir -p "$TRM_RUN_DIR"',
              f'settings "$task" > "$TRM_RUN_DIR/.{SETTINGS_FILE}.$SLURM_JOB_ID.tmp"',
              f'mv -f "$TRM_RUN_DIR/.{SETTINGS_FILE}.$SLURM_JOB_ID.tmp" "$TRM_RUN_DIR/{SETTINGS_FILE}"', "",
              "# the rendezvous: the first host of the allocation, on a port of this job's own (jobs of an",
              "# array, or of other users, may share a node)",
              # awk reads every line: `head -n 1` could end first and, with pipefail, SIGPIPE would stop the job
              'TRM_RDZV_HOST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | awk "NR == 1")',
              f"TRM_RDZV_PORT=$(({cluster.rdzv_port} + SLURM_JOB_ID % {PORT_SPREAD}))",
              "export TRM_RDZV_HOST TRM_RDZV_PORT",
              'echo "trm-kaggle: run ${run_names[$task]} on $SLURM_JOB_NUM_NODES node(s), rendezvous at '
              '$TRM_RDZV_HOST:$TRM_RDZV_PORT"']
    node = torchrun_line(cluster, endpoint=_Expanded("$TRM_RDZV_HOST:$TRM_RDZV_PORT"),
                         node_rank=_Expanded("$SLURM_NODEID"), rdzv_id=_Expanded("trm-$SLURM_JOB_ID"),
                         settings=_Expanded(f"$TRM_RUN_DIR/{SETTINGS_FILE}"), export=export)
    per_node = "exec " + " ".join(_shell_word(t) for t in node)
    lines += ["# one torchrun launcher per node; $SLURM_NODEID is read on each node",
              f"srun --nodes={cluster.nodes} --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c {shlex.quote(per_node)}",
              ""]
    return "\n".join(lines)
