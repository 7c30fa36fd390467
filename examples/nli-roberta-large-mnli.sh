#!/bin/sh
# NLI on premise/hypothesis pairs, three labels. <COMMIT> values are placeholders: put the commits
# you reviewed (init refuses a branch name and prints the commit it points to).
set -eu
python -m job init \
  --model FacebookAI/roberta-large-mnli --model-revision "${MODEL_COMMIT:?<COMMIT> of FacebookAI/roberta-large-mnli}" \
  --dataset nyu-mll/glue --dataset-revision "${DATASET_COMMIT:?<COMMIT> of nyu-mll/glue}" \
  --config mnli --split validation_matched \
  --text premise --text-pair hypothesis --label label --id idx \
  --name mnli-roberta-large-temperature-scaling \
  --pools explore:1000,calibration:2000,audit:rest \
  --out examples/nli-roberta-large-mnli.json
