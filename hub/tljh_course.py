# The Littlest JupyterHub: /opt/tljh/config/jupyterhub_config.d/course.py (hub/tljh.sh copies it).
c = get_config()  # noqa: F821
c.Spawner.environment.update(
    {
        "COURSE_BUDGET": "ci",  # the short training runs; every claim still holds
        "COURSE_MODELS": "/opt/course-models",  # chapter 10's model, fetched once
        "NBGITPULLER_APP": "lab",
        # `make submit` hands in to each learner's own folder (hub/tljh.sh makes the parent)
        "COURSE_SUBMIT": lambda spawner: f"/srv/hand-in/{spawner.user.name}",
        "OMP_NUM_THREADS": "1",
    }
)
