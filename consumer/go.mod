module example.com/consumer

go 1.22

require (
	github.com/redis/go-redis/v9 v9.0.5
	github.com/seed5e0b76d9/redislock v0.0.0-00010101000000-000000000000
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
)

// Nothing is tagged yet: the library of this checkout stands for its release.
replace github.com/seed5e0b76d9/redislock => ../
