package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the unit of the times in /proc/stat (USER_HZ, 100 on Linux).
const userHZ = 100

// readCPU returns the machine's busy time over all cores, from the first
// line of /proc/stat (user, nice, system, irq and softirq; not idle, iowait,
// steal or guest, which user already holds), and this process's CPU time
// with its reaped children's.
func readCPU() (busy, own time.Duration, ok bool) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0, 0, false
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system (idle iowait) irq softirq
		n, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			return 0, 0, false
		}
		ticks += n
	}
	var self, children syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &self) != nil || syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children) != nil {
		return 0, 0, false
	}
	own = rusageTime(self) + rusageTime(children)
	return time.Duration(ticks) * time.Second / userHZ, own, true
}

// rusageTime is the user + system time of a getrusage result.
func rusageTime(r syscall.Rusage) time.Duration {
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}
