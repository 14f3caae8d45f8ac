// Package layout holds no code: its test pins the shape of freeze's
// imports (issue "house"), so that a change that deepens the house or
// brings a door back fails here instead of in a review.
//
//   - At most 9 layers: the longest chain of freeze's own packages from
//     cmd/freeze (today 8: cmd/freeze -> drill -> stop -> rounds ->
//     freeze -> match -> container -> proc; 9 before stop took incident
//     in).
//   - say, freeze's voice, imports neither stop nor timeline.
//   - guard serves; it does not import order (cmd/freeze gives it its
//     runner), and drill does not import guard (cmd/freeze gives it its
//     asker).
//   - The gate is one of freeze's methods: stop and order do
//     not import package gate (freeze.Seal, freeze.Open, freeze.Spare).
//   - SIGINT, SIGTERM and SIGHUP are caught in cmd/ only: no package
//     under internal/ calls signal.Notify, but priority for SIGXCPU, the
//     lift's own watch of its real-time budget.
package layout
