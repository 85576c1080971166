from pacer_intake.main import main

main()
