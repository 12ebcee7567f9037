package testkit

import (
	"flag"
	"strconv"
)

// SetParallel lets up to n parallel tests run at once, unless the command
// line gave -parallel: the default is GOMAXPROCS, two on a two-core
// machine, which suits tests that compute but leaves a package whose
// parallel tests wait on clocks, sockets and child processes waiting one
// pair at a time. Call it from TestMain before m.Run.
func SetParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(n))
	}
}
