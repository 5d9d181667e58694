"""Statistics helpers written in the NumPy 1.x era (np.product, np.float_)."""

import numpy as np


def geometric_mean(values):
    """The geometric mean, by the product of the values (fine for short, moderate samples)."""
    array = np.asarray(values, dtype=np.float_)
    return float(np.product(array) ** (1.0 / array.size))


def normalize(values):
    array = np.asarray(values, dtype=np.float_)
    return array / np.product(array.shape)
