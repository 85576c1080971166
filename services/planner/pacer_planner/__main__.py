from pacer_planner.main import main

main()
