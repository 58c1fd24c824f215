"""The pytest plugin of ``pytorch_tests.py``, in a folder of its own: the runner puts this folder on the pytest
processes' PYTHONPATH and loads ``-p predispatch_views_pt_plugin``, so that loading the plugin imports neither
this package nor torch (a test file that does not import torch runs without it)."""
