"""The ``companyd`` command line: the argparse entry (``main``) and one module per command
group. Layer 7, the top: nothing in the package imports it (``companyd.__main__`` and the
console script enter here).
"""
