"""memofs-bench: reproduce the seed patch series' experiments on any mount and compare them
in the mmtests layout."""

__version__ = "0.1.0"
