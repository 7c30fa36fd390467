#!/bin/sh
# A RoBERTa sentiment model on a sentiment split. The model has three outputs (negative, neutral,
# positive); the job needs the dataset to have the same K labels, so use a 3-class split such as
# cardiffnlp/tweet_eval config sentiment. <COMMIT> values are placeholders, as in the other example.
set -eu
python -m job init \
  --model cardiffnlp/twitter-roberta-base-sentiment-latest \
  --model-revision "${MODEL_COMMIT:?<COMMIT> of cardiffnlp/twitter-roberta-base-sentiment-latest}" \
  --dataset cardiffnlp/tweet_eval --dataset-revision "${DATASET_COMMIT:?<COMMIT> of cardiffnlp/tweet_eval}" \
  --config sentiment --split validation \
  --text text --label label \
  --name tweeteval-roberta-sentiment-temperature-scaling \
  --out examples/sentiment-roberta-tweeteval.json
