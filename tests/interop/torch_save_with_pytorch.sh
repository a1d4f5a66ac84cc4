#!/bin/sh
# torch.save files made by PyTorch, read by wxtrain; wxtrain's own, read by PyTorch.
#   torch_save_with_pytorch.sh PYTHON WORK_DIR TEST_BINARY
set -e
python=$1
work=$2
test=$3
rm -rf "$work"
mkdir -p "$work"
"$python" "$(dirname "$0")/torch_save_fixture.py" write "$work"
WXTRAIN_TORCH_SAVE_FIXTURES=$work "$test"
"$python" "$(dirname "$0")/torch_save_fixture.py" check "$work"
