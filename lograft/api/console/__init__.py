"""The web console: static files served at `/ui` (docs/console.md), and the
CORS answers that let a console loaded from one node call the others."""
