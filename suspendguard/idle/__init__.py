"""The idle step: do the accelerators themselves say they are idle?

After the drain, every device is read through the backends that work here
(pyACL, npu-smi, DCMI for Ascend; NVML for NVIDIA).

base.py: the contract a backend speaks and the readings it answers with;
acl.py, npusmi.py, dcmi.py, nvml.py: one backend each; registry.py: the
backends by name; catalog.py: names and families without importing any
backend; sampler.py: ``check_idle``, sampling until each device settles.
Nothing is imported here, so importing catalog.py stays cheap.
"""
