#!/usr/bin/env bash
# The Littlest JupyterHub (one server): the course in the learners' environment. Run as root
# in the course's folder after TLJH's installer; docs/instructors.md ("A hub kit") explains it.
set -euo pipefail
cd "$(dirname "$0")/.."
USER_PY=/opt/tljh/user/bin/python
# The CPU build of torch, from the script CI runs
TORCH_INDEX=https://download.pytorch.org/whl/cpu bash .ci/install-python "$USER_PY"
"$USER_PY" -m pip install -q nbgitpuller .
COURSE_MODELS=/opt/course-models "$USER_PY" -c \
  "import sys; from course_lib.gpt.smollm2 import main; sys.exit(main([]))"
site=$("$USER_PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
cp hub/work_copies.py "$site/"
mkdir -p /opt/tljh/user/etc/jupyter/jupyter_server_config.d /opt/tljh/user/share/jupyter/lab/settings
cp hub/jupyter_server_config.d/work_copies.json hub/jupyter_server_config.d/culling.json \
  /opt/tljh/user/etc/jupyter/jupyter_server_config.d/
"$USER_PY" hub/lab_overrides.py /opt/tljh/user/share/jupyter/lab/settings
cp hub/tljh_course.py /opt/tljh/config/jupyterhub_config.d/course.py
install -d -m 1733 /srv/hand-in  # learners make their own folder here, and cannot list others
tljh-config set limits.memory 6G  # chapter 10: two kernels with the real model, the server, one more (kernel_sizing.json)
tljh-config set limits.cpu 1
tljh-config set services.cull.timeout 7200  # an idle server stopped after two hours (its kernels' state lost)
tljh-config set user_environment.default_app jupyterlab
tljh-config reload
