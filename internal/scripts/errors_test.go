package scripts

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// replyError is an error reply from Redis, as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

// What a Redis older than 7.0 answers the first script of a call (SET
// cannot take NX and GET together before 7.0; SPUBLISH and ZADD GT are
// unknown before 7.0 and 6.2) becomes an error that says which version the
// library needs, keeps the reply in the chain, and is permanent: a wait
// ends at once.
func TestFailed_OldRedisSaysWhichVersion(t *testing.T) {
	for _, reply := range []string{
		"ERR syntax error script: 1a2b, on @user_script:6.",
		"ERR Error running script (call to f_1a2b): @user_script:9: Unknown Redis command called from script",
		"ERR unknown command 'spublish', with args beginning with: ",
	} {
		err := Failed("acquire", "k", replyError(reply))
		if !strings.Contains(err.Error(), "(redislock needs Redis 7.0 or newer)") {
			t.Errorf("%q: %v", reply, err)
		}
		if !strings.HasPrefix(err.Error(), `redislock: acquire "k": `) || strings.Count(err.Error(), "redislock:") != 1 {
			t.Errorf("%q: not one prefix and the key: %v", reply, err)
		}
		var rerr redis.Error
		if !errors.As(err, &rerr) || !Permanent(err) {
			t.Errorf("%q: the reply is not kept in the chain, or waiting would go on: %v", reply, err)
		}
	}
}

// An error of the library wrapped by Failed keeps one "redislock:" prefix
// and names the key once.
func TestFailed_OnePrefix(t *testing.T) {
	err := Failed("acquire", "pool", Refuse(wrongKind("permits:2", Mode{Permits: 3})))
	want := `redislock: acquire "pool": the key holds another kind of lock or data: a semaphore of 2 permits, where this call asks for a permit of a semaphore of 3 (WithPermits)`
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
	if !errors.Is(err, ErrWrongKind) {
		t.Error("ErrWrongKind is not in the chain")
	}
}
