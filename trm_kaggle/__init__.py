"""trm_kaggle: Tiny Recursive Models for ARC-AGI, from a laptop CPU to Kaggle.

Data flows one way: tasks -> dataset -> batches -> model -> predictions -> votes
-> submission -> bundle. Each step lives in its own subpackage.
"""

__version__ = "0.1.0"
