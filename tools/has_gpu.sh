#!/bin/bash
# Exit 0 when a CUDA device answers on this machine.
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'
