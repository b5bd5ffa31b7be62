package compress

import (
	"bytes"
	"maps"
	"os"
	"sync"
	"time"

	"willow/internal/cpustat"
)

// taskCostWeight is the weight of one task in the moving averages of a
// codec's task seconds: about the last 16 tasks count.
const taskCostWeight = 1.0 / 16

// taskCost keeps, by image codec, two moving averages over the
// successful image tasks (heartbeat Load.image_task_seconds and
// image_task_cpu_seconds): the wall seconds a worker slot was held, and
// the task's share of the process's CPU seconds (cpuShare). The master
// multiplies them by the upload arrival rate to forecast how busy the
// workers and the compress hosts' CPUs will be before a queue forms
// (auto-flex's compress_forecast, compress_cpu_forecast_normal): CPU is
// what the codec costs wherever it runs, wall over CPU is how much the box
// stretches it now. A codec keeps its last averages while no task uses it.
type taskCost struct {
	mu   sync.Mutex         // guards wall and cpu
	wall map[string]float64 // codec -> seconds
	cpu  map[string]float64
}

// observe adds one task of codec that held a slot for wall and used cpu.
func (c *taskCost) observe(codec string, wall, cpu time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wall == nil {
		c.wall, c.cpu = map[string]float64{}, map[string]float64{}
	}
	ewma(c.wall, codec, wall.Seconds())
	if cpu > 0 {
		ewma(c.cpu, codec, cpu.Seconds())
	}
}

func ewma(m map[string]float64, k string, v float64) {
	if old, ok := m[k]; ok {
		m[k] = old + taskCostWeight*(v-old)
	} else {
		m[k] = v
	}
}

// snapshot returns copies of the averages, nil before the first task.
func (c *taskCost) snapshot() (wall, cpu map[string]float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.wall) == 0 {
		return nil, nil
	}
	return maps.Clone(c.wall), maps.Clone(c.cpu)
}

// cpuShare apportions the process's CPU time among the image tasks
// running: the CPU the process used between two task starts or ends is
// split evenly among the tasks that ran in between. It counts what a
// task costs on every thread, not only its own: the resize runs on
// goroutines and x265 encodes on threads of its own (a HEIC task's own
// thread uses about a ninth of its CPU). On a node that shares its
// process with other roles (one box) a task's share also holds what the
// other roles used while it ran: it reads high, never low. CPU used while
// no image task runs is nobody's.
type cpuShare struct {
	read    func() time.Duration // the process's CPU time; cpustat.Process
	mu      sync.Mutex           // guards last and running
	last    time.Duration
	running map[*shareTask]struct{}
}

// shareTask is one image task's share so far.
type shareTask struct{ cpu time.Duration }

// advance splits the CPU used since the last call among the running
// tasks. Under mu.
func (c *cpuShare) advance() {
	now := c.read()
	d := now - c.last
	c.last = now
	if d <= 0 || len(c.running) == 0 {
		return
	}
	each := d / time.Duration(len(c.running))
	for t := range c.running {
		t.cpu += each
	}
}

// start counts a task from now and returns a function that ends it and
// returns its share of the process's CPU.
func (c *cpuShare) start() func() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.read == nil {
		c.read = cpustat.Process
	}
	if c.running == nil {
		c.running = map[*shareTask]struct{}{}
	}
	c.advance()
	t := &shareTask{}
	c.running[t] = struct{}{}
	return func() time.Duration {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.advance()
		delete(c.running, t)
		return t.cpu
	}
}

// hostID names the host the node runs on (Load.host), so the master counts
// the CPUs of nodes that share one once: the kernel's boot id, which
// every process and container on one kernel reads alike, else the host
// name, else "".
func hostID() string {
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		if id := string(bytes.TrimSpace(b)); id != "" {
			return "boot:" + id
		}
	}
	name, _ := os.Hostname()
	return name
}
