"""Code repair: the corpus and its streaming builder (`repair.py`), mutations (`bugs.py`), ruff pairs (`lint.py`),
character / BPE grids (`tokens.py`)."""
