#!/usr/bin/env bash
# Install vLLM 0.33.0 for tests/test_vllm.py without its GPU dependencies: the wheel --no-deps,
# then the small pure-Python packages that `vllm.distributed.parallel_state` (packaging, psutil,
# pyzmq, regex) and `vllm.config` (the rest; a GroupCoordinator's device communicator imports
# it) need, also --no-deps. The list was found by importing both until nothing was missing.
# Run it in the activated test environment (torch installed already).
set -euo pipefail
pip install -q --no-deps vllm==0.33.0 \
    packaging psutil pyzmq regex \
    pydantic pydantic_core typing-inspection annotated-types cbor2 \
    transformers huggingface_hub tqdm httpx2 httpcore2 truststore h11 safetensors tokenizers \
    aiohttp multidict yarl propcache aiohappyeyeballs aiosignal frozenlist \
    openai-harmony openai sniffio anyio
python -c "import vllm.distributed.parallel_state, vllm.config"
