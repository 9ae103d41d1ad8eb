"""The simulation helper: one training step of the job's model on meta tensors, live bytes counted.

Never imported by gpudoc itself (gpudoc's process does not import torch): ``gpudoc.estimate.simulate``
runs ``run.py`` by path in the job's own interpreter, a JSON spec on stdin, one JSON result on
stdout. The modules here import each other relatively, so they work loaded under any package name.
"""
