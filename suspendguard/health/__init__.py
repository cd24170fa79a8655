"""After resume: is each device healthy? Checked, and repaired, before any job is started again.

model.py: the typed answers; nvidia.py and ascend.py: the checks of each
family (the CUDA probe's child is cuda_probe.py, stdlib only); resume.py:
the check, the repairs in their order, and the check again. Nothing here is
imported on the suspend path: only ``restore`` and ``status`` use it.
"""
