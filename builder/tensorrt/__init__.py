"""TensorRT plans (``builder export --format tensorrt``): profiles, config, build, parity.

The builder process never imports ``tensorrt``: the engine is built and run by a standalone
script (``engine_script.py``, written beside the plan as ``build_engine.py``) in a subprocess.
Modules: ``options`` (flags, tolerances), ``profiles`` (batch profile <-> dynamic batcher),
``config`` (the ``tensorrt_plan`` config.pbtxt), ``script`` (rendering the reproduce script),
``build`` (running it), ``calibration`` (INT8 rows), ``parity`` (engine vs ONNX Runtime) and
``plan`` (the export step that ties them together).
"""
