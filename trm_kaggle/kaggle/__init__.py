"""Kaggle: solving unseen tasks inside a kernel, and bundling for offline submission."""
