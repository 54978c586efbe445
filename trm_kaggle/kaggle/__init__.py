"""The offline Kaggle bundle: the wheels and weights datasets and the submission kernel, validated,
pushable, and runnable in a local sandbox (`bundle.py` lists its parts)."""
