"""trm_kaggle: Tiny Recursive Models for ARC-AGI, from a laptop CPU to Kaggle.

Data flows one way, and so do the imports:

    tasks -> dataset -> batches -> model -> votes -> submission -> bundle

* tasks -> dataset -> batches: `data/` (ARC sources and the grid check, augmentations,
  the dataset builders and format, and the loader that makes batches);
* batches -> model: `model/` (the network, its ACT rollout, losses, inference exports
  and upstream's checkpoints); `optim/` and `train/` fit it to batches;
* model -> votes -> submission: `evaluate/` (predictions, decoding, votes, metrics,
  reports, submission files); `solve/` is the Kaggle kernel's job, test-time training
  then evaluation inside a time budget;
* submission -> bundle: `kaggle/` (the offline datasets and kernel).

A layer imports only the layers before it (`tests/test_layering.py` checks it);
`errors`, `jsonio`, `atomic` and `config` serve them all; `cli` and `pipeline` sit on
top and only call the package.
"""

__version__ = "0.1.0"
