#!/bin/bash
# Session 12's GPU runs (the device tool, one H200). Run 7 on d560e59:
tools/gpu_bundle.sh                                 # here: builds .gpubundle
# there (.gpubundle carried):
OUT=/tmp/gco GPU_CHECK_BUDGET=400 tools/gpu_check.sh
# Run 8 on f6ac5a0: .gpuprobe/run.sh (see run8_probe.txt). A third run, of
# the reworked kernel, was refused: "no new device machine is lent at
# present".
