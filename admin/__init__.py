"""The admin pages (KCP): server-rendered fleet, runtime, Compass and parts pages for
operators, signed in with their Kubernetes credentials (TokenReview, SubjectAccessReview),
and ``tether status`` for the terminal. See docs/admin.md."""
