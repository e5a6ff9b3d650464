package report

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// Machine describes where a benchmark ran.
type Machine struct {
	OS       string  `json:"os"`
	Kernel   string  `json:"kernel"`
	CPU      string  `json:"cpu"`
	Cores    int     `json:"cores"`
	MemoryGB float64 `json:"memory_gib"`
	// Disk describes the file system holding the servers' data.
	Disk    string `json:"disk"`
	Go      string `json:"go"`
	LoadAvg string `json:"loadavg_start"`
	// LoadAvgEnd is the load average when the run ended; a load well
	// above what the bench itself explains means the machine was shared.
	LoadAvgEnd string `json:"loadavg_end"`
}

// Describe reads the machine's details from /proc, /sys and /etc. dataDir is
// where the servers keep their data. Fields it cannot read say "unknown".
func Describe(dataDir string) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), OS: "unknown", CPU: "unknown", Kernel: "unknown"}
	if v := field("/etc/os-release", "PRETTY_NAME="); v != "" {
		m.OS = strings.Trim(v, `"`)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if v := field("/proc/cpuinfo", "model name"); v != "" {
		m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
	}
	if v := field("/proc/meminfo", "MemTotal:"); v != "" {
		var kb float64
		fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
		m.MemoryGB = kb / (1 << 20)
	}
	m.Disk = describeDisk(dataDir)
	m.LoadAvg = LoadAvg()
	return m
}

// LoadAvg is /proc/loadavg's first three fields.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// field returns the rest of the first line of path that starts with prefix.
func field(path, prefix string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			return v
		}
	}
	return ""
}

// describeDisk finds the mount holding dir (longest matching mount point in
// /proc/self/mounts) and, for a block device, whether it is rotational and
// its model.
func describeDisk(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "unknown"
	}
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	var src, mnt, fstype string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Fields(sc.Text())
		if len(p) < 3 {
			continue
		}
		if (abs == p[1] || strings.HasPrefix(abs, strings.TrimSuffix(p[1], "/")+"/")) && len(p[1]) >= len(mnt) {
			src, mnt, fstype = p[0], p[1], p[2]
		}
	}
	if mnt == "" {
		return "unknown"
	}
	desc := fmt.Sprintf("%s on %s (%s)", src, mnt, fstype)
	var st syscall.Statfs_t
	if syscall.Statfs(abs, &st) == nil {
		desc += fmt.Sprintf(", %.0f GiB free", float64(st.Bavail)*float64(st.Bsize)/(1<<30))
	}
	if dev := filepath.Base(src); strings.HasPrefix(src, "/dev/") {
		// /sys/class/block/<partition>/.. is the whole disk.
		for _, d := range []string{dev, filepath.Base(filepath.Dir(evalLink("/sys/class/block/" + dev)))} {
			if rot, err := os.ReadFile("/sys/block/" + d + "/queue/rotational"); err == nil {
				// Virtual disks often claim to be rotational: quote, don't judge.
				desc += fmt.Sprintf(", %s rotational=%s", d, strings.TrimSpace(string(rot)))
				if model, _ := os.ReadFile("/sys/block/" + d + "/device/model"); len(strings.TrimSpace(string(model))) > 0 {
					desc += " model " + strings.TrimSpace(string(model))
				}
				break
			}
		}
	}
	return desc
}

func evalLink(p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return p
	}
	return r
}
