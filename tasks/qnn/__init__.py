"""The QNN environment: provisioned from PyPI's onnxruntime-qnn wheel (sdk.py), checked by a
real HTP lowering (check.py), and the lowering helpers the QNN probes use (htp.py)."""
