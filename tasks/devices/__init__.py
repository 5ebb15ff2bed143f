"""Devices: the inventory (inventory.py), the SoC table (soc.py), transports (ssh.py, android.py),
the leased pool (pool.py) and the faults that are the device's, not the change's (faults.py).
The pipeline's device target (tasks/pipeline/device_target.py) uses them; see docs/DEVICES.md."""

# The environment a device-reaching process reads (the command line, a triage worker, a device
# host's worker): one list, so the worker passes them to the pipeline and docs name them all.
# Kept here, free of imports, so naming them does not load the SSH and adb stacks.
VARIABLES = ("ETRIAGE_DEVICES", "ETRIAGE_DEVICE_KEY", "ETRIAGE_DEVICE_KNOWN_HOSTS", "ETRIAGE_DEVICE_REDIS_URL",
             "ETRIAGE_DEVICE_BROKER_URL")
