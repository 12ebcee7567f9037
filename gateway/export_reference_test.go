package gateway

import "github.com/linkgate/linkgate/config"

// RestartOnly returns the names of the fields of next that a reload from
// run would keep at their running values until a restart (restartOnly),
// so that the marks of docs/configuration.md can be checked against the one list.
func RestartOnly(run, next *config.Config) []string {
	_, changed := restartOnly(run, next)
	return changed
}
