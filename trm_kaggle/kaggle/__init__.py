"""The offline Kaggle bundle: the wheels and weights datasets and the submission kernel, validated,
pushable, and runnable in a local sandbox (`bundle.py` lists its parts)."""

from trm_kaggle.faces import lazy_face

# What other layers use, by the module that defines it; the rest of the package is private to it.
_EXPORTS = {
    "BundleIds": "metadata",
    "Target": "wheels",
    "build_bundle": "bundle",
    "build_wheels": "wheels",
    "main": "bundle",
    "manifest_folders": "packed",
    "ARCHIVE_KEY": "packed",
    "RUN_STATE_ARCHIVE": "train_kernel",
    "open_all": "packed",
    "open_packed": "packed",
    "packed_manifest": "packed",
    "pip_download": "wheels",
    "resolve_dependencies": "wheels",
}
_MODULES = ('bundle',)  # public modules

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS, _MODULES)
