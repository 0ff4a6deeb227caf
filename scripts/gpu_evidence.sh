#!/usr/bin/env bash
# GPU evidence (issue 53, item 5): the demo gate in float32 and bfloat16, the self-test's mutants in bfloat16 and a
# few unchanged runs, on one CUDA GPU, into one folder, within 9 minutes; scripts/gpu_evidence.py says what each
# step runs and writes.
#
#   scripts/gpu_evidence.sh [OUT] [--test-mode] [--budget-s S] [--wheels DIR]
#
# OUT: the folder (default $SPECGUARD_EVIDENCE_OUT, else gpu-evidence). PYTHON: the interpreter with torch (default
# python3). --test-mode: the same steps on the CPU (float32, smaller settings). The 9 minutes count from here.
set -u
started=$(date +%s)
cd "$(dirname "$0")/.." || exit 2
out=${SPECGUARD_EVIDENCE_OUT:-gpu-evidence}
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    out=$1
    shift
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
exec "${PYTHON:-python3}" scripts/gpu_evidence.py --out "$out" --started "$started" "$@"
