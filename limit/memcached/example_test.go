package memcached_test

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/limit/memcached"
)

func ExampleNew() {
	metrics := memcached.NewMetrics(prometheus.DefaultRegisterer) // once per process
	cfg := limit.DefaultConfig()
	cfg.Store = "memcached"
	cfg.Memcached.Servers = []string{"10.0.0.1:11211", "10.0.0.2:11211"}
	plan, err := limit.Compile(nil, limit.DefaultIdentity(), cfg, nil) // checks the servers
	if err != nil {
		panic(err)
	}
	s := memcached.New(plan.Store().Memcached, metrics, slog.Default())
	defer s.Close() // sends what is still pending

	ctx := context.Background()
	c := limit.Counter{Rule: "login_ip", Value: "203.0.113.7"}
	now := time.Now().Unix()
	buckets := []limit.Bucket{{Level: limit.Second, Start: now, TTL: 2 * time.Minute}}
	counts := make([]int64, len(buckets))
	switch err := s.Load(ctx, c, buckets, counts); {
	case errors.Is(err, memcached.ErrUnavailable):
		// The breaker is open: apply on_store_error at once.
	case err != nil:
		// A timeout or another failure: apply on_store_error.
	case counts[0] < 2:
		_ = s.Add(ctx, c, buckets, 1) // sent within about 5 ms
	}
}
