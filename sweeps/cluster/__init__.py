"""Ray itself: the versions a sweep runs on and the one module that reaches into Ray's insides
(``tunefix``), connecting to an existing cluster, token authentication, submitting a sweep as
a Ray job, and the deployment files (``deploy/``)."""
