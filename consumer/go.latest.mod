module example.com/consumer

go 1.26.0

require (
	github.com/redis/go-redis/v9 v9.23.0
	github.com/seed5e0b76d9/redislock v0.0.0-00010101000000-000000000000
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

// Nothing is tagged yet: the library of this checkout stands for its release.
replace github.com/seed5e0b76d9/redislock => ../
