package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// nativeName is the configuration (in the uncontended cycles) and the
// implementation (in the many-keys setup) of a lock on the server's native
// compare-and-delete: what a plain lock's release would cost without its
// script (see docs/how-it-works.md, "Native compare-and-delete"). It does
// not wait for a held key, so it runs in no contended setup.
const nativeName = "native-delifeq"

// nativeDesc says what it does.
const nativeDesc = "no library: SET key token NX PX 8000, then DELIFEQ key token (Valkey 9 and newer): a release by the native compare-and-delete, which sees no line; fails at once on a held key"

// native reports whether the configuration is nativeName's.
func (c config) native() bool { return c.name == nativeName }

// nativeImpl takes a lock with SET NX PX and releases it with DELIFEQ.
// Both commands go through Process, so that an AutoPipeliner batches them.
type nativeImpl struct{ rdb redis.UniversalClient }

// errNativeTaken is its "not obtained": SET NX found the key.
var errNativeTaken = errors.New(nativeName + ": key taken")

func (n nativeImpl) name() string { return nativeName }

func (n nativeImpl) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := base64.RawURLEncoding.EncodeToString(b[:]) // as bsm's: 128 random bits
	set := redis.NewBoolCmd(ctx, "set", key, token, "nx", "px", leaseTTL.Milliseconds())
	if err := n.rdb.Process(ctx, set); err != nil {
		return nil, err
	}
	if !set.Val() {
		return nil, errNativeTaken
	}
	return func(ctx context.Context) error {
		del := redis.NewIntCmd(ctx, "delifeq", key, token)
		if err := n.rdb.Process(ctx, del); err != nil {
			return err
		}
		if del.Val() != 1 {
			return errors.New(nativeName + ": the key did not hold the token")
		}
		return nil
	}, nil
}

// hasDelIfEq reports whether the server knows DELIFEQ (Valkey 9 and newer).
func hasDelIfEq(ctx context.Context, rdb *redis.Client) (bool, error) {
	info, err := rdb.Do(ctx, "command", "info", "delifeq").Slice()
	if err != nil {
		return false, err
	}
	return len(info) == 1 && info[0] != nil, nil // [nil]: unknown
}

// skipNative drops nativeName's configurations when the server has no
// DELIFEQ, and returns the note that says so ("" when nothing was dropped).
func skipNative(ctx context.Context, rdb *redis.Client, cfgs []config, mkCfgs []mkConfig) ([]config, []mkConfig, string, error) {
	isNative := func(c config) bool { return c.native() }
	isNativeMK := func(c mkConfig) bool { return c.impl.name == nativeName }
	if !slices.ContainsFunc(cfgs, isNative) && !slices.ContainsFunc(mkCfgs, isNativeMK) {
		return cfgs, mkCfgs, "", nil
	}
	ok, err := hasDelIfEq(ctx, rdb)
	if err != nil || ok {
		return cfgs, mkCfgs, "", err
	}
	cfgs = slices.DeleteFunc(cfgs, isNative)
	mkCfgs = slices.DeleteFunc(mkCfgs, isNativeMK)
	note := fmt.Sprintf("%s was skipped: this server has no DELIFEQ (Valkey 9 and newer have it).", nativeName)
	logf("%s", note)
	return cfgs, mkCfgs, note, nil
}
