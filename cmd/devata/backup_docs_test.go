package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// docCommands returns the devata command lines of text: each line of a
// fenced block that runs devata (continuations joined, VAR=value prefixes,
// trailing # comments and redirections dropped), and apart, each inline
// `devata …` span, which may only name a command or a flag.
func docCommands(text string) (out, mentions []string) {
	inBlock := false
	var pending string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			pending = ""
			continue
		}
		if !inBlock {
			for _, m := range regexp.MustCompile("`(devata [^`]+)`").FindAllStringSubmatch(line, -1) {
				mentions = append(mentions, m[1])
			}
			continue
		}
		line = pending + strings.TrimSpace(line)
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			pending = cont + " "
			continue
		}
		pending = ""
		for _, cut := range []string{" #", " > ", " | "} {
			if i := strings.Index(line, cut); i >= 0 {
				line = line[:i]
			}
		}
		words := shellWords(line)
		for len(words) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0]) {
			words = words[1:]
		}
		if len(words) > 0 && words[0] == "devata" {
			out = append(out, strings.Join(words, " "))
		}
	}
	return out, mentions
}

// shellWords splits a command line at blanks outside quotes and $(…),
// keeping the quotes (a value's text does not matter here, only that it
// is one word).
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	var quote rune
	depth := 0
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'':
			quote = r
		case r == '(' && i > 0 && s[i-1] == '$':
			depth++
		case r == ')' && depth > 0:
			depth--
		case (r == ' ' || r == '\t') && depth == 0:
			if cur.Len() > 0 {
				words = append(words, cur.String())
				cur.Reset()
			}
			continue
		}
		cur.WriteRune(r)
	}
	if cur.Len() > 0 {
		words = append(words, cur.String())
	}
	return words
}

// Every devata command that docs/runbook.md's backup and restore sections
// (and the backup alerts' runbooks) and docs/backup.md give is one devata has, with those flags and
// arguments: cobra finds the command and parses the line as it would
// run it. A span that stands for a family of flags (--keep-…) or a choice
// ([--yes], FILE|DIR) is a pattern, not a command, and is left out.
func TestBackupDocsCommandsExist(t *testing.T) {
	runbook, err := os.ReadFile("../../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(runbook), "\n## Backing up etcd")
	end := strings.Index(string(runbook), "\n## Upgrading Talos")
	if start < 0 || end < start {
		t.Fatal("docs/runbook.md: no section from \"## Backing up etcd\" to \"## Upgrading Talos\"")
	}
	alerts := strings.Index(string(runbook), "\n### DevataEtcdBackupMissing")
	alertsEnd := strings.Index(string(runbook), "\n### DevataCertificateExpiring")
	if alerts < 0 || alertsEnd < alerts {
		t.Fatal("docs/runbook.md: no alert sections from DevataEtcdBackupMissing to DevataCertificateExpiring")
	}
	backupDoc, err := os.ReadFile("../../docs/backup.md")
	if err != nil {
		t.Fatal(err)
	}
	var tried []string
	for doc, text := range map[string]string{"docs/runbook.md": string(runbook[start:end]) + string(runbook[alerts:alertsEnd]), "docs/backup.md": string(backupDoc)} {
		lines, mentions := docCommands(text)
		for _, line := range lines {
			if strings.ContainsAny(line, "[|") || regexp.MustCompile(`--[a-z-]*…`).MatchString(line) {
				continue
			}
			tried = append(tried, line)
			args := shellWords(line)[1:]
			root := (&app{}).newRootCommand()
			cmd, rest, err := root.Find(args)
			if err != nil || cmd == root {
				t.Errorf("%s: %q: no such devata command (%v)", doc, line, err)
				continue
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Errorf("%s: %q: %v", doc, line, err)
				continue
			}
			pos := cmd.Flags().Args()
			if cmd.HasSubCommands() && len(pos) > 0 {
				t.Errorf("%s: %q: devata %s has no subcommand %s", doc, line, cmd.Name(), pos[0])
				continue
			}
			if err := cmd.ValidateArgs(pos); err != nil {
				t.Errorf("%s: %q: %v", doc, line, err)
			}
		}
		// a mention names a command and perhaps flags of it
		for _, m := range mentions {
			tried = append(tried, m)
			words := shellWords(m)[1:]
			root := (&app{}).newRootCommand()
			cmd, rest, err := root.Find(words)
			if err != nil || cmd == root {
				t.Errorf("%s: `%s`: no such devata command (%v)", doc, m, err)
				continue
			}
			if cmd.HasSubCommands() && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
				t.Errorf("%s: `%s`: %s has no subcommand %s", doc, m, cmd.CommandPath(), rest[0])
				continue
			}
			cmd.InitDefaultHelpFlag()
			flags := cmd.Flags()
			flags.AddFlagSet(cmd.InheritedFlags())
			for _, w := range words {
				name, _, _ := strings.Cut(strings.TrimPrefix(w, "--"), "=")
				if strings.HasPrefix(w, "--") && !strings.Contains(name, "…") && flags.Lookup(name) == nil {
					t.Errorf("%s: `%s`: %s has no flag --%s", doc, m, cmd.CommandPath(), name)
				}
			}
		}
	}
	joined := strings.Join(tried, "\n")
	for _, want := range []string{"devata backup etcd --to s3://", "devata backup verify --latest s3://", "devata backup list s3://", "devata backup prune s3://", "devata bootstrap --recover-from", "devata plan --recover-from", "--encrypt-to-file", "--age-identity ~/.ssh/id_ed25519", "devata backup verify --latest s3://BUCKET/PREFIX/"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no command with %q was checked: the extraction lost it (checked:\n%s)", want, joined)
		}
	}
}
