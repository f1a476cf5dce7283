"""fednorm: Batch Normalization in federated learning, reproduced on one code base."""

__version__ = "0.1.0"
