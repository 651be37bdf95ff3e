#!/usr/bin/env bash
# Thirteenth session, device call 7: call 6's script, run again on the rebuilt `chunk` (README).
exec bash "$(dirname "$0")/../2026-11-30-s13-call6/call.sh" "$@"
