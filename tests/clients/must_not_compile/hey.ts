// Must NOT compile: tests/integration/test_generated_clients.py requires tsc to reject exactly the
// marked case (TS2678). ResumeRun's error bodies carry only the codes ResumeRun declares;
// `request_not_queued` is CancelRequest's 409.
import { resumeRun } from "./gen/sdk.gen";

export async function conflictOf(runId: string): Promise<string> {
  const { error } = await resumeRun({ path: { run_id: runId }, body: { decisions: [] } });
  switch (error?.error) {
    case "invalid_state":
      return "the run is not waiting for a decision";
    case "request_not_queued": // expected: TS2678, not a code of ResumeRun
      return "never";
  }
  return "";
}
