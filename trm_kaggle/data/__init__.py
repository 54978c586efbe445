"""Tasks -> dataset -> batches: ARC tasks (read, checked, written), augmentations, the dataset builders and
format, and the loader that turns a dataset into batches."""
