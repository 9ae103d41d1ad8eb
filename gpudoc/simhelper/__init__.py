"""The simulation helper: one training step of the job's model on meta tensors, live bytes counted.

Never imported by gpudoc itself (gpudoc's process does not import torch): ``gpudoc.estimate.simulate``
runs ``run.py`` by path in the job's own interpreter and asks it for each micro batch an estimate
needs, a JSON spec per line on stdin, a marked JSON result per line on stdout (``main``). The modules here import each other relatively, so they work loaded under any package name.
"""
