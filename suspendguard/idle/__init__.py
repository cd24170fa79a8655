"""The idle step: do the accelerators themselves say they are idle?

After the drain, every device is read through the backends that work here
(pyACL, npu-smi, DCMI for Ascend; NVML, nvidia-smi for NVIDIA).

Each backend's name, family and keys are declared once, in
config.IDLE_BACKENDS, below idle/ because the schema needs them. base.py: the
contract a backend speaks and the readings it answers with (without
importing any backend); acl.py, npusmi.py, dcmi.py, nvml.py, nvidiasmi.py:
one backend each; sampler.py: the backends by name, and ``check_idle``,
sampling until each device settles.
"""
