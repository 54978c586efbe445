"""Training beyond one machine, on engines clusters already run: torch's elastic launcher (`torchrun`),
Kubernetes and SLURM. Nothing here schedules anything: `torchrun` runs the worker groups, the cluster
runs the jobs; this package checks a launch before it starts and writes the job files that start it.

    torchrun.py  `trm-kaggle torchrun`: torchrun's own launch, checked first, its failures in one line
    plan.py      `trm-kaggle launch` and `sweep --launcher`: settings resolved and checked, files written
    jobs.py      what every job file is made from: the settings on the shared volume, the torchrun line
    k8s.py       an Indexed Job + headless Service (or a Kubeflow PyTorchJob) per training
    slurm.py     an sbatch script (a job array for a sweep)
    files.py     writing job files: atomically, never over an edited file without --force
"""

from trm_kaggle.faces import lazy_face

# What other layers use, by the module that defines it; the rest of the package is private to it.
_EXPORTS = {
    "cluster_config": "plan",
    "launch_sweep": "plan",
    "launch_training": "plan",
}
_MODULES = ('torchrun',)  # public modules

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS, _MODULES)
