package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// peakRSS is a live process's peak resident set (VmHWM) in MiB.
func peakRSS(pid int) float64 {
	return kibField(fmt.Sprintf("/proc/%d/status", pid), "VmHWM:") / 1024
}

// kibField reads a "Key:   N kB" line of a /proc file (0 when absent).
func kibField(path, key string) float64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				kb, _ := strconv.Atoi(f[0])
				return float64(kb)
			}
		}
	}
	return 0
}

// procCPU is a live process's user plus system CPU seconds (/proc/PID/stat,
// in clock ticks of 1/100 s, the Linux USER_HZ).
func procCPU(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// the command name may hold spaces: fields count from after its ')'
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// loopbackBytes is the bytes received on lo so far (each byte sent over
// loopback is received once).
func loopbackBytes() int64 {
	data, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && name == "lo" {
			if f := strings.Fields(rest); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return tv(ru.Utime) + tv(ru.Stime)
}

func loadAvg() [3]float64 {
	var out [3]float64
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	for i, f := range strings.Fields(string(data)) {
		if i == 3 {
			break
		}
		out[i], _ = strconv.ParseFloat(f, 64)
	}
	return out
}

func memTotalMiB() float64 { return kibField("/proc/meminfo", "MemTotal:") / 1024 }

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
