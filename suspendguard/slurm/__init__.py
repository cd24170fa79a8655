"""Slurm's power saving, asked through each node's guard: the controller's programs and the nodes' answers."""
