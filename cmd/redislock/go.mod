module github.com/seed5e0b76d9/redislock/cmd/redislock

go 1.26.0

require (
	github.com/redis/go-redis/v9 v9.23.0
	github.com/seed5e0b76d9/redislock v0.1.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

// The library at the same commit: drop this when redislock and
// cmd/redislock/v0.1.0 are tagged, so that go install ...@version works.
replace github.com/seed5e0b76d9/redislock => ../..
