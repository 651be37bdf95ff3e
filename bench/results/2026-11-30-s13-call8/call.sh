#!/usr/bin/env bash
# Thirteenth session, device call 8: call 6's script, run again on `chunk` rebuilt with the chunk counters one per 128-byte line (README).
exec bash "$(dirname "$0")/../2026-11-30-s13-call6/call.sh" "$@"
