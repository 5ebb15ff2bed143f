"""Devices: the inventory (inventory.py), the SoC table (soc.py), transports (ssh.py, android.py),
the leased pool (pool.py) and the faults that are the device's, not the change's (faults.py).
The pipeline's device target (tasks/pipeline/device_target.py) uses them; see docs/DEVICES.md."""
