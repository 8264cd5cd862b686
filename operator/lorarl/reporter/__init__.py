"""The in-job reporter and launcher, one small stdlib-only module per job (Python 3.10+).

They run inside the training image, which has none of the lorarl packages: the renderer ships
them as one zipapp (``lorarl.artifact``) in the job's ConfigMap, run as
``python3 /opt/lorarl/reporter.pyz --namespace NS --name JOB ... -- python3 train.py ARGS``.

Modules:
  logparse    miles log lines -> events
  rounding    numbers for people (significant digits)
  checkpoints the save directories -> which LoRA saves are complete, which one is being written
  attempts    the attempt ledger on the checkpoint volume (what survives a retry)
  launcher    the resume decision: attempt number, save directory, --num-rollout, adapter
  summary     events + checkpoint scan + ledger -> the status fields the reporter owns
  kubeapi     JSON merge patches to the LoraRLJob status subresource
  schedule    the background thread: throttled patches, scans, heartbeats
  supervise   the trainer as a child process: byte-exact passthrough, signals, exit codes
  cli         wires them together
"""
