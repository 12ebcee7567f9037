package stats_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/linkgate/linkgate/stats"

	"github.com/linkgate/linkgate/rollup"
)

// The gateway mounts the stats API at its prefix with the prefix stripped.
func ExampleNew() {
	now := func() time.Time { return time.Date(2026, 11, 23, 10, 17, 42, 0, time.UTC) }
	stats := stats.New(newStatsReader(), rollup.DefaultTiers(), stats.Options{Now: now})
	mux := http.NewServeMux()
	mux.Handle("/stats/", http.StripPrefix("/stats", stats))
	mux.Handle("/stats", http.StripPrefix("/stats", stats))

	for _, target := range []string{"/stats/abc?last=5m", "/stats/abc?last=3m&format=csv", "/stats?last=1w&step=1w"} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
		body, _ := io.ReadAll(w.Body)
		fmt.Printf("%s\n%s", target, body)
	}
	// Output:
	// /stats/abc?last=5m
	// {"short_key":"abc","known":true,"partial":false,"total":123456,"bot_total":789,"range_total":20,"bot_range_total":6,"from":1795428720,"to":1795429062,"step":60,"classes":{"bot":{"total":610,"range_total":4},"preview":{"total":100,"range_total":0},"scanner":{"total":50,"range_total":2},"prefetch":{"total":20,"range_total":0},"internal":{"total":9,"range_total":0}},"class_points":{"bot":[0,1,1,0,1,1],"scanner":[0,0,1,0,0,1]},"points":[[1795428720,3,0],[1795428780,4,1],[1795428840,5,2],[1795428900,0,0],[1795428960,7,1],[1795429020,1,2]]}
	// /stats/abc?last=3m&format=csv
	// unix_seconds,count,bot_count,class_bot,class_preview,class_scanner,class_prefetch,class_internal
	// 1795428840,5,2,1,0,1,0,0
	// 1795428900,0,0,0,0,0,0,0
	// 1795428960,7,1,1,0,0,0,0
	// 1795429020,1,2,1,0,1,0,0
	// /stats?last=1w&step=1w
	// {"short_key":"","known":true,"partial":false,"total":9876543,"bot_total":4321,"range_total":80,"bot_range_total":1,"from":1794787200,"to":1795429062,"step":604800,"classes":{"bot":{"total":4321,"range_total":1},"preview":{"total":0,"range_total":0},"scanner":{"total":0,"range_total":0},"prefetch":{"total":0,"range_total":0},"internal":{"total":0,"range_total":0}},"class_points":{"bot":[0,1]},"points":[[1794787200,70,0],[1795392000,10,1]]}
}
