"""``serve --workers N``: one gateway replica as N worker processes sharing its ports.

* :mod:`~gateway.workers.cpus`: the default worker count, the CPUs this process may use;
* :mod:`~gateway.workers.context`: what a worker knows of itself and its siblings;
* :mod:`~gateway.workers.supervisor`: the parent process (ports, the embedded cluster, signals);
* :mod:`~gateway.workers.child`: a worker process's entry point.
"""
