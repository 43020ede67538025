package redisurl

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Each URL form makes the client of its kind, and a bad URL an error.
func TestParse(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://127.0.0.1:6379/2":                               "node",
		"rediss://u:p@127.0.0.1:6379":                            "node",
		"redis+sentinel://127.0.0.1:26379?master_name=mymaster":  "sentinel",
		"redis://127.0.0.1:26379?master_name=m&addr=127.0.0.1:1": "sentinel",
		"redis+cluster://127.0.0.1:7000":                         "cluster",
		"redis://127.0.0.1:7000?addr=127.0.0.1:7001":             "cluster",
		"rediss+cluster://127.0.0.1:7000?addr=127.0.0.1:7001":    "cluster",
	} {
		kind, _, err := parse(raw)
		require.NoError(t, err, raw)
		assert.Equal(t, want, kind, raw)
	}
	for _, raw := range []string{"", "127.0.0.1:6379", "http://127.0.0.1", "redis://", "redis+sentinel://127.0.0.1:26379", "redis://127.0.0.1:6379?bogus=1", "%zz"} {
		c, err := NewClient(raw)
		assert.Error(t, err, raw)
		assert.Nil(t, c, raw)
	}
}

// A port must be a decimal number in 1..65535, in the URL's host and in
// every addr parameter, for every kind of URL: go-redis takes 0, 65536 or
// 99999 as they come, and the mistake would show only when dialing.
func TestParse_PortOutOfRange(t *testing.T) {
	for _, port := range []string{"0", "65536", "99999", "-1", "x", "+80", "6379x", ""} {
		for _, raw := range []string{
			"redis://127.0.0.1:" + port,
			"rediss://127.0.0.1:" + port + "/2",
			"redis://[::1]:" + port,
			"redis+sentinel://127.0.0.1:" + port + "?master_name=m",
			"redis+sentinel://127.0.0.1:26379?master_name=m&addr=127.0.0.1:" + port,
			"redis://127.0.0.1:26379?master_name=m&addr=127.0.0.1:" + port,
			"redis+cluster://127.0.0.1:" + port,
			"redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:" + port,
			"redis://127.0.0.1:7000?addr=127.0.0.1:" + port,
		} {
			c, err := NewClient(raw)
			if assert.Error(t, err, raw) {
				assert.Contains(t, err.Error(), "port", raw)
			}
			assert.Nil(t, c, raw)
		}
	}
	for _, raw := range []string{"redis://127.0.0.1:1", "redis://127.0.0.1:65535", "redis://127.0.0.1", "redis://[::1]:6379",
		"redis+cluster://127.0.0.1:7000?addr=[::1]:65535"} {
		c, err := NewClient(raw)
		require.NoError(t, err, raw)
		require.NoError(t, c.Close())
	}
}

// The clients reach real deployments: a node, a Sentinel-managed primary,
// and a Cluster.
func TestClientsReachRealDeployments(t *testing.T) {
	node := redistest.Start(t)
	sentinel := redistest.StartSentinel(t)
	cluster := redistest.StartCluster(t)
	for name, raw := range map[string]string{
		"node":     "redis://" + node.Addr(),
		"sentinel": "redis+sentinel://" + sentinel.SentinelAddrs()[0] + "?master_name=" + sentinel.MasterName(),
		"cluster":  "redis+cluster://" + cluster.Addrs()[0],
	} {
		t.Run(name, func(t *testing.T) {
			c, err := NewClient(raw)
			require.NoError(t, err)
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, c.Set(ctx, "k", name, time.Minute).Err())
			assert.Equal(t, name, c.Get(ctx, "k").Val())
			switch name {
			case "sentinel":
				assert.IsType(t, &redis.Client{}, c)
			case "cluster":
				assert.IsType(t, &redis.ClusterClient{}, c)
			}
		})
	}
}
